"""Settings, packaging, docker-compose, the demo and the development server."""
