"""Command-line tools: `danube-cli` (produce, consume) and `danube-admin`."""
