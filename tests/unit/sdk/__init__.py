"""SDK and danube-cli tests against an in-process fake broker."""
