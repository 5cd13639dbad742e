"""The small architectures of the reproduced papers, layer for layer.

Each builder takes the per-example input shape ``(C, H, W)`` and the number of classes and
returns an ``nn.Sequential`` with named layers. The dense models (``logreg``, ``mlp``) also take a
flat input ``(F,)`` (tabular feature vectors); a convolutional model given one raises a
``ValueError`` naming it. The width of the first fully connected layer is
derived from the input shape (the figure in each docstring is for the paper's canonical input),
so the same architecture also runs on, e.g., 3×32×32 data. Initialisation is PyTorch's default
(Kaiming-uniform weights), which is what the papers' PyTorch reference code uses. Where a paper
writes ReLU → MaxPool the model is built MaxPool → ReLU (``Stack.max_pool``): the same function
and gradients bit for bit, the ReLU on the pooled map.

None of these models normalises across examples, so they support per-example gradients through
``torch.func.vmap(grad(...))``, Opacus' ``GradSampleModule`` and fedgame's book-keeping clipper.
Models with Dropout draw different masks per example under ``vmap`` only when called with
``randomness="different"``; use ``model.eval()`` for deterministic per-example gradients.
"""

from __future__ import annotations

from torch import nn

from fedgame.models._layers import InShape, Shape3, Stack

__all__ = [
    "jdp_cifar_cnn",
    "jdp_mnist_cnn",
    "lenet5",
    "logreg",
    "mcmahan_cifar_cnn",
    "mcmahan_cnn",
    "mlp",
    "phs_cifar_cnn",
    "phs_mnist_cnn",
    "qidpfl_cifar_cnn",
    "simple_cnn",
]


def logreg(*, in_shape: InShape, num_classes: int) -> nn.Module:
    """Multinomial logistic regression: Flatten → Linear(C·H·W, classes), or Linear(F, classes)
    on feature vectors ``(F,)`` (the Flatten then leaves the B×F batch as it is).

    The convex baseline of federated-learning experiments; with softmax cross-entropy it is
    exactly logistic regression. 1×28×28, 10 classes: 7,850 parameters; (F,): F·classes + classes.
    """
    s = Stack(model="logreg", in_shape=in_shape)
    s.flatten()
    s.linear("fc", num_classes)
    return s.build()


def mlp(*, in_shape: InShape, num_classes: int) -> nn.Module:
    """The "2NN" of McMahan et al. 2017 (AISTATS, "Communication-Efficient Learning of Deep
    Networks from Decentralized Data", §3): two hidden layers of 200 ReLU units.

    Flatten → Linear(C·H·W or F, 200) → ReLU → Linear(200, 200) → ReLU → Linear(200, classes).
    1×28×28, 10 classes: 199,210 parameters.
    """
    s = Stack(model="mlp", in_shape=in_shape)
    s.flatten()
    s.linear("fc1", 200)
    s.add("relu1", nn.ReLU())
    s.linear("fc2", 200)
    s.add("relu2", nn.ReLU())
    s.linear("fc3", num_classes)
    return s.build()


def mcmahan_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """The FedAvg "CNN" of McMahan et al. 2017 (§3), the Fashion-MNIST model of FedPCS
    (Sec. VIII-A, 'Datasets and Local Model Architecture': "similar to [8]").

    Conv2d(C, 32, 5, pad 2) → ReLU → MaxPool 2 → Conv2d(32, 64, 5, pad 2) → ReLU → MaxPool 2 →
    Flatten (64·H/4·W/4) → Linear(·, 512) → ReLU → Linear(512, classes).
    1×28×28, 10 classes: 1,663,370 parameters.
    """
    s = Stack(model="mcmahan_cnn", in_shape=in_shape)
    s.conv("conv1", 32, 5, padding=2)
    s.add("relu1", nn.ReLU())
    s.max_pool("pool1", 2)
    s.conv("conv2", 64, 5, padding=2)
    s.add("relu2", nn.ReLU())
    s.max_pool("pool2", 2)
    s.flatten()
    s.linear("fc1", 512)
    s.add("relu3", nn.ReLU())
    s.linear("fc2", num_classes)
    return s.build()


def qidpfl_cifar_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """McMahan et al.'s CIFAR-10 CNN (2017, §3; after the TensorFlow CIFAR-10 tutorial), the
    CIFAR-10 model of QI-DPFL (Sec. V-A, "consistent with" McMahan et al.), registered also as
    ``mcmahan_cifar_cnn`` (FedPCS's CIFAR-10 model).

    Conv(C→64, 5×5, pad 2) → ReLU → MaxPool(3, stride 2, pad 1) → Conv(64→64, 5×5, pad 2) →
    ReLU → MaxPool(3, 2, pad 1) → Flatten (64·8·8 = 4096 for 32×32) → Linear(·, 384) → ReLU →
    Linear(384, 192) → ReLU → Linear(192, classes). The paddings reproduce TensorFlow's "SAME"
    sizes of the original (32 → 16 → 8); the tutorial's local response normalisation is
    omitted. 3×32×32, 10 classes: 1,756,426 parameters.
    """
    return _mcmahan_cifar("qidpfl_cifar_cnn", in_shape=in_shape, num_classes=num_classes)


def mcmahan_cifar_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """FedPCS's CIFAR-10 model: the network of :func:`qidpfl_cifar_cnn` under its own name (the
    name error messages give)."""
    return _mcmahan_cifar("mcmahan_cifar_cnn", in_shape=in_shape, num_classes=num_classes)


def _mcmahan_cifar(model: str, *, in_shape: Shape3, num_classes: int) -> nn.Module:
    s = Stack(model=model, in_shape=in_shape)
    s.conv("conv1", 64, 5, padding=2)
    s.add("relu1", nn.ReLU())
    s.max_pool("pool1", 3, stride=2, padding=1)
    s.conv("conv2", 64, 5, padding=2)
    s.add("relu2", nn.ReLU())
    s.max_pool("pool2", 3, stride=2, padding=1)
    s.flatten()
    s.linear("fc1", 384)
    s.add("relu3", nn.ReLU())
    s.linear("fc2", 192)
    s.add("relu4", nn.ReLU())
    s.linear("fc3", num_classes)
    return s.build()


def simple_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """The "simple CNN" of NIID-Bench (Li, Diao, Chen & He, "Federated Learning on Non-IID Data
    Silos: An Experimental Study", ICDE 2022, §V) used by FedDisco (Ye et al., ICML 2023) for
    CINIC-10 — the LeNet-style network of the PyTorch CIFAR-10 tutorial.

    Conv(C→6, 5×5) → ReLU → MaxPool 2 → Conv(6→16, 5×5) → ReLU → MaxPool 2 → Flatten (16·5·5 =
    400 for 32×32) → Linear(400, 120) → ReLU → Linear(120, 84) → ReLU → Linear(84, classes).
    3×32×32, 10 classes: 456 + 2,416 + 48,120 + 10,164 + 850 = 62,006 parameters.
    """
    return _lenet_like("simple_cnn", in_shape=in_shape, num_classes=num_classes, first_padding=0)


def lenet5(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """LeNet-5 (LeCun et al. 1998) with ReLU and max-pooling: fedgame's reading of the EMNIST
    model of QI-DPFL (Sec. V-A).

    Conv(C→6, 5×5, pad 2) → ReLU → MaxPool 2 → Conv(6→16, 5×5) → ReLU → MaxPool 2 → Flatten
    (400 for 28×28) → Linear(400, 120) → ReLU → Linear(120, 84) → ReLU → Linear(84, classes).
    1×28×28: 66,126 parameters with 62 classes (EMNIST ByClass), 61,706 with 10.
    """
    return _lenet_like("lenet5", in_shape=in_shape, num_classes=num_classes, first_padding=2)


def phs_mnist_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """The PHS paper's MNIST CNN (Sec. VI-C: convolutions of 16 and 32 channels, fully connected
    layers of 512 and 32 units) — the DP-SGD MNIST network of TensorFlow Privacy and Opacus'
    ``examples/mnist.py`` (Papernot et al., "Tempered Sigmoid Activations for Deep Learning
    with Differential Privacy", AAAI 2021).

    Conv2d(C→16, k8, s2, p2) → ReLU → MaxPool2d(2, stride 1) → Conv2d(16→32, k4, s2) → ReLU →
    MaxPool2d(2, stride 1) → Flatten (32·4·4 = 512 for 28×28) → Linear(512, 32) → ReLU →
    Linear(32, classes). 1×28×28, 10 classes: 1,040 + 8,224 + 16,416 + 330 = 26,010.

    Padding 2 is used here (28 → 13 → 12 → 5 → 4); Opacus' example pads conv1 by 3
    (28 → 14 → 13 → 5 → 4), which reaches the same 512 features and parameter count.
    """
    s = Stack(model="phs_mnist_cnn", in_shape=in_shape)
    s.conv("conv1", 16, 8, stride=2, padding=2)
    s.add("relu1", nn.ReLU())
    s.max_pool("pool1", 2, stride=1)
    s.conv("conv2", 32, 4, stride=2)
    s.add("relu2", nn.ReLU())
    s.max_pool("pool2", 2, stride=1)
    s.flatten()
    s.linear("fc1", 32)
    s.add("relu3", nn.ReLU())
    s.linear("fc2", num_classes)
    return s.build()


def phs_cifar_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """The PHS paper's CIFAR-10 CNN ("the well-tuned design from [38]") — the tanh network of
    Papernot et al. (AAAI 2021), tempered-sigmoid activations being what DP-SGD trains best.

    Three blocks [Conv3×3(pad 1) → tanh → Conv3×3(pad 1) → tanh → MaxPool(2, 2)] with
    32, 64, 128 channels → Flatten (128·4·4 = 2048 for 32×32) → Linear(2048, 128) → tanh →
    Linear(128, classes). 3×32×32, 10 classes: 550,570 parameters.
    """
    s = Stack(model="phs_cifar_cnn", in_shape=in_shape)
    for b, width in enumerate((32, 64, 128), start=1):
        s.conv(f"conv{b}a", width, 3, padding=1)
        s.add(f"tanh{b}a", nn.Tanh())
        s.conv(f"conv{b}b", width, 3, padding=1)
        s.add(f"tanh{b}b", nn.Tanh())
        s.max_pool(f"pool{b}", 2, stride=2)
    s.flatten()
    s.linear("fc1", 128)
    s.add("tanh4", nn.Tanh())
    s.linear("fc2", num_classes)
    return s.build()


def jdp_mnist_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """JDP-FL's MNIST CNN (Sec. 6.1: "two convolution layers, and two fully connected layers with
    dropout regularization") as fedgame reads it — the classic PyTorch ``examples/mnist``
    network.

    Conv2d(C, 10, 5) → MaxPool 2 → ReLU → Conv2d(10, 20, 5) → Dropout2d(0.5) → MaxPool 2 →
    ReLU → Flatten (320 for 28×28) → Linear(320, 50) → ReLU → Dropout(0.5) → Linear(50, classes).
    1×28×28, 10 classes: 260 + 5,020 + 16,050 + 510 = 21,840 parameters.
    """
    s = Stack(model="jdp_mnist_cnn", in_shape=in_shape)
    s.conv("conv1", 10, 5)
    s.max_pool("pool1", 2)
    s.add("relu1", nn.ReLU())
    s.conv("conv2", 20, 5)
    s.add("drop1", nn.Dropout2d(0.5))
    s.max_pool("pool2", 2)
    s.add("relu2", nn.ReLU())
    s.flatten()
    s.linear("fc1", 50)
    s.add("relu3", nn.ReLU())
    s.add("drop2", nn.Dropout(0.5))
    s.linear("fc2", num_classes)
    return s.build()


def jdp_cifar_cnn(*, in_shape: Shape3, num_classes: int) -> nn.Module:
    """JDP-FL's CIFAR-10 CNN (Sec. 6.1: "six convolution layers with ReLU units and max-pooling
    layers") as fedgame reads it: three VGG-style blocks and a linear classifier.

    Blocks [Conv3×3(pad 1) → ReLU → Conv3×3(pad 1) → ReLU → MaxPool 2] with 32, 64, 128
    channels → Flatten (2048 for 32×32) → Linear(2048, classes).
    3×32×32, 10 classes: 307,498 parameters.
    """
    s = Stack(model="jdp_cifar_cnn", in_shape=in_shape)
    for b, width in enumerate((32, 64, 128), start=1):
        s.conv(f"conv{b}a", width, 3, padding=1)
        s.add(f"relu{b}a", nn.ReLU())
        s.conv(f"conv{b}b", width, 3, padding=1)
        s.add(f"relu{b}b", nn.ReLU())
        s.max_pool(f"pool{b}", 2)
    s.flatten()
    s.linear("fc", num_classes)
    return s.build()


def _lenet_like(model: str, *, in_shape: Shape3, num_classes: int, first_padding: int) -> nn.Module:
    """Conv(6, 5×5) → ReLU → pool → Conv(16, 5×5) → ReLU → pool → 120 → 84 → classes."""
    s = Stack(model=model, in_shape=in_shape)
    s.conv("conv1", 6, 5, padding=first_padding)
    s.add("relu1", nn.ReLU())
    s.max_pool("pool1", 2)
    s.conv("conv2", 16, 5)
    s.add("relu2", nn.ReLU())
    s.max_pool("pool2", 2)
    s.flatten()
    s.linear("fc1", 120)
    s.add("relu3", nn.ReLU())
    s.linear("fc2", 84)
    s.add("relu4", nn.ReLU())
    s.linear("fc3", num_classes)
    return s.build()
