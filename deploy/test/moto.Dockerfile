# moto_server, an in-memory S3 endpoint, standing in for MinIO in the compose test
# (deploy/docker-compose.test.yml) and the testcontainers fixtures (tests/support/containers.py).
# MOTO_REQUIREMENT matches the dev extra in pyproject.toml (tests/unit/deploy checks it).
#
#   docker build --network host -f deploy/test/moto.Dockerfile -t danube-test-moto:bookworm deploy/test
ARG BASE_IMAGE=danube-base:bookworm
FROM ${BASE_IMAGE}

ARG MOTO_REQUIREMENT="moto[server]>=5"
# PEM certificates to trust for pip (a TLS-inspecting proxy), as in deploy/Dockerfile.
ARG EXTRA_CA_CERTS=""

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/moto/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates python3 python3-venv; \
    rm -rf /var/lib/apt/lists/*; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
        printf '%s\n' "$EXTRA_CA_CERTS" > /usr/local/share/ca-certificates/build-extra-ca.crt; \
        update-ca-certificates; \
    fi; \
    python3 -m venv /opt/moto; \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt pip install "$MOTO_REQUIREMENT"; \
    moto_server --help > /dev/null

CMD ["moto_server", "--help"]
