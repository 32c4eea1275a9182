"""The ViT Explainer's Python side, in one package (docs/layout.md): `component` (the
components-v2 glue: the message of each rerun, the `view` state it reads), `tour` (the guided
tour; the words it may use that need explaining in `glossary`), `lesson_export` and
`lesson_model` (the same browser modules packed into one offline file or a static site). Its
browser code is dashboard/static/explainer/ (docs/layout.md says why it is not in here); its
payloads come from xai_core/lessons/explainer.py."""
