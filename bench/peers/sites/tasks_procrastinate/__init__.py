"""Procrastinate through its Django integration: the site's one app, whose ``tasks`` module the
integration discovers."""
