"""The domain engine: the status vocabulary, the guarded transition engine and its history, fair admission."""
