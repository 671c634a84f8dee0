#!/usr/bin/env bash
# Start the local services the tests use if they are not running (machine notes: python-svc).
# Never fails by itself: the test run decides whether a missing service is fatal (CI=true).
set -u
if command -v pg_lsclusters >/dev/null 2>&1; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
fi
if command -v redis-server >/dev/null 2>&1; then
  if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
    for _ in $(seq 1 20); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.5; done
  fi
fi
exit 0
