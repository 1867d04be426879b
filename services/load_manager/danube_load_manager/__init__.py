"""danube-load-manager: places topics, re-places a dead broker's topics, drains brokers, moves topics."""
