"""The lookup service: Danube's front door (Discovery) and the admin API."""
