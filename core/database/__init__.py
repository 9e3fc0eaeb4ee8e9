"""Database helpers: bounded retries of lock conflicts, prepared queries."""
