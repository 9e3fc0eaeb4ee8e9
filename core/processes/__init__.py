"""What local processes hold and share: files on disk (atomic writes, safe paths), process trees, ports, per-process expiring caches, the user-code guard."""
