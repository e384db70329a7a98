# Spark's Python workers re-read pyspark.zip's directory on every request unless this is in place
# (zip_imports.py); importing any Tidemark Spark-side code installs it.
from workers.spark import zip_imports

zip_imports.install()
