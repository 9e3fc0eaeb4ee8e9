"""The `falcon` command line client (docs/architecture.md, Processes and Packages).

It is its own layer: it imports no Django and talks to the API server over HTTP only. Modules:
`start` (the console script: a help page from `helpcache`, or `main`), `main` (the top-level
group), `auth` and `exp` (one module per command group),
`options` (shared options), `env` (the injectable environment), `client` (HTTP), `credentials`
(the token cache), `output` (table/json/yaml rendering), `exit_codes`, `errors`.
"""
