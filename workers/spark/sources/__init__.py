"""One reader per source kind (worker side, Django-free): `registry.py` maps each kind's name to
its module; `files.py` reads the listed files every file-based kind plans over. The control side
of each kind is in `inventory/sources/`."""
