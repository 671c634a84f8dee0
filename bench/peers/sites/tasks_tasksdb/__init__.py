"""django-tasks-db: Django's Tasks framework (``django.tasks``) on its ORM database backend."""
