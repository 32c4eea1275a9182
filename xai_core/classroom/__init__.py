"""Class mode: one instructor and many students' phones on one lesson.

Everything a class shares lives in one SQL database through SQLAlchemy (`store.ClassStore`):
the class (a short code and the hash of the instructor's key), the place the instructor is at
(page, view, picture, model, tour step), the questions, one answer per student and question,
and the learning check. SQLite on the server's disk by default, PostgreSQL by URL
(`VIT_LENS_CLASS_DB`). Pure Python: no Streamlit here (the app's side is
`dashboard/classroom.py`), no torch except in `reveal` (the model's answer to a question).
"""
