"""A host URLconf that does not include the apps' URLs (tests/embedding/test_embed.py)."""

from django.urls import path

from tests.support.embed_site import home

urlpatterns = [path("", home)]
