# etcd for the compose test (deploy/docker-compose.test.yml) and the testcontainers fixtures
# (tests/support/containers.py): Debian's etcd-server and etcdctl, so no registry is needed.
# The command (etcd and its flags) comes from whoever runs it.
#
#   docker build --network host -f deploy/test/etcd.Dockerfile -t danube-test-etcd:bookworm deploy/test
ARG BASE_IMAGE=danube-base:bookworm
FROM ${BASE_IMAGE}

RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server etcd-client; \
    rm -rf /var/lib/apt/lists/*; \
    etcd --version

CMD ["etcd", "--help"]
