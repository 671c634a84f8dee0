"""Who may do what: credentials (JWT and service credentials), and the checks every surface
(``POST /``, ``/poll/``, ``/api/``) makes before it acts."""
