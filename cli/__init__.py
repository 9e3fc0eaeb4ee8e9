"""The `falcon` command line client (architecture page, "CLI"; seed 000, 3.3.4 and 3.4).

It is its own layer: it imports no Django and talks to the API server over HTTP only. Modules:
`main` (the top-level group and entry point), `auth` and `exp` (one module per command group),
`options` (shared options), `env` (the injectable environment), `client` (HTTP), `credentials`
(the token cache), `output` (table/json/yaml rendering), `exit_codes`, `errors`.
"""
