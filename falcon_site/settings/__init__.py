"""Django settings for Falcon (`DJANGO_SETTINGS_MODULE=falcon_site.settings`), read from
environment variables.

Composed of, in this order:

- `base`: Django itself (apps, middleware, database, templates, static files, logging, the
  REST framework, the OpenAPI schema) and `FALCON_VAR_DIR`;
- `auth`: the authentication mode, the local issuer, Cloudflare Access, the internal token;
- `clusters`: the clusters file, the default local cluster, the artifact root, the config limit;
- `controllers`: the gRPC addresses, the controllers' interval and leader election;
- `analysis`: the Data Analyzer's controller address, queues, plugins and output store.

Each module's docstring lists the environment variables it reads. Every production concern has
an embedded default: SQLite under `FALCON_VAR_DIR`, a local artifact directory, the local
cluster backend and the local JWT issuer.

Importing the settings only reads the environment and files that already exist. The local
state they read (the folder, the secret key, the internal token, the signing key) is created by
`python manage.py prepare` (`falcon_site.startup`), which `scripts/setup.sh`, `manage.py migrate`
and `manage.py runlocal` run; the system checks name anything still missing.
"""
# In this order (not alphabetical): the later modules build on `base`.
from .base import *  # noqa: F401,F403
from .auth import *  # noqa: F401,F403
from .clusters import *  # noqa: F401,F403
from .controllers import *  # noqa: F401,F403
from .analysis import *  # noqa: F401,F403
