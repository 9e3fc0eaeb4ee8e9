# Falcon: one image for the API server (HTTP and gRPC) and the controllers.
# Stage 1 builds the wheels that need a compiler (mysqlclient needs the MySQL client headers and
# pkg-config); stage 2 carries only the virtualenv and the code.
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential default-libmysqlclient-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.txt pyproject.toml README.md ./
RUN pip install -r requirements.txt
COPY . .
RUN pip install --no-deps .

FROM python:3.11-slim-bookworm AS runtime
# libmariadb3: the shared library mysqlclient links against; nothing else from the build stage.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libmariadb3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 falcon \
 && useradd --system --uid 10001 --gid falcon --home-dir /app --shell /usr/sbin/nologin falcon
COPY --from=build /opt/venv /opt/venv
COPY --from=build --chown=10001:10001 /src /app
WORKDIR /app
# FALCON_VAR_DIR on /tmp: the root filesystem is read-only in Kubernetes (an emptyDir is mounted).
# The same image runs every analysis Pod: the built-in plugins (plugins/bin) are on PATH, and the
# numeric USER below satisfies the Pods' runAsNonRoot (a user name could not be checked).
ENV PATH=/app/plugins/bin:/opt/venv/bin:$PATH FALCON_PLUGIN_DIR=/app/plugins/bin \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    FALCON_VAR_DIR=/tmp/falcon-var DJANGO_DEBUG=0
USER 10001:10001
EXPOSE 8000 50051 50052
CMD ["gunicorn", "falcon_site.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--timeout", "60"]
