"""The dashboard's pages and forms (Django test client), and in a real browser (`*_browser.py`)."""
