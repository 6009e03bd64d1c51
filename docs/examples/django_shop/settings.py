"""The parts of a Django project's settings that quasar_redis uses (beside your own)."""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "change me")
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "django_shop.urls"
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}

# Where the jobs live: the Redis URL (also read from QUASAR_REDIS_URL, then REDIS_URL, when
# None) and the namespace of this project's queues.
QUASAR_REDIS_URL = os.environ.get("QUASAR_REDIS_URL") or os.environ.get("REDIS_URL")
QUASAR_NAMESPACE = os.environ.get("SHOP_NAMESPACE", "shop")
