"""Hard limits on stored strings, shared by the wire types and the models.

Identifiers are indexed, and a PostgreSQL btree entry holds at most 2704 bytes (an index may pair
two identifiers), so every identifier-like string is capped at 1024 characters and 1024 bytes of
UTF-8. A cron expression is stored in a 255-character column.
"""

ID_MAX_LENGTH = 1024
ID_MAX_BYTES = 1024
CRON_MAX_LENGTH = 255
