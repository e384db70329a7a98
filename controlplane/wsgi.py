import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
application = get_wsgi_application()

# The objects of the loaded application (modules, classes, the URL patterns and the views they
# import, settings) live as long as the process; left among the collected ones, every full
# collection walks all of them again, a pause that lands on whichever request allocates past the
# threshold (at 10,000 jobs a cheap page waited ~185 ms for one). The URL patterns are loaded
# here, not by the first request, so that the views are among what gc.freeze() moves out of the
# collector's reach (bench/bench_dashboard.py measures the hot pages frozen and not, alternately).
loaded = get_resolver().url_patterns
gc.freeze()
