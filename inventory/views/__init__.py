"""Dashboard pages, one module per resource: thin views over selectors (reads) and the actions of
inventory/actions.py (writes); inventory/urls.py names each page's view in its module.

Every page needs a login and the viewer role (a user in no role group sees nothing, as in the
API); every change needs the role its action declares (skipping a batch: admin), a POST with a
CSRF token, and redirects after it.
"""
