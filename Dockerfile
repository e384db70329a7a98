FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
RUN pip install --no-cache-dir -e .
COPY . .
# static files with hashed names, compressed; WhiteNoise serves them from here
ENV STATIC_ROOT=/app/staticfiles
RUN TIDEMARK_DEV=1 DATABASE_URL=postgres://build@localhost/build REDIS_URL=redis://localhost/0 \
    python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["gunicorn", "controlplane.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--access-logfile", "-"]
