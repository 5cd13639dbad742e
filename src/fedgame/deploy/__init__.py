"""Running fedgame runs outside this process: deployment bridges (Flower)."""
