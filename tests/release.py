"""The previous release: the code an upgrade runs beside while the new migrations apply
(tests/integration/test_upgrade.py serves it on the newest schema; tests/test_migrations_online.py
lints every migration added since it). Bump it when a release is cut (CHANGELOG.md)."""

PREVIOUS = "bb3400d601e2251e74a2cbb75721d9efc6794c17"  # 0.1.0
