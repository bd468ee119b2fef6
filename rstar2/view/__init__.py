"""`rstar2 view`: the recorded rollouts and a run's curves as a local web page (`records.py`
reads the files, `app.py` serves them, `static/` is the page)."""
