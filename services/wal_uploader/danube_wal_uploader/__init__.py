"""``danube-wal-uploader``: ships a broker's WAL segments to object storage (see README.md)."""
