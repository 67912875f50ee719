"""The binder's parts, one module per concern; ``rivulet.sql.binder.Binder`` puts them together.

- ``base``: what every part shares: the session context bound against (``BindContext``),
  what binding produces (``BoundQuery``), the mark of engine-built nodes, quoting.
- ``relations``: table references resolved against the catalog and the system relations,
  table functions in FROM, TUMBLE / HOP as subqueries.
- ``calls``: function calls and operators checked against the allow-list and rewritten
  (session functions, macros, PostgreSQL's errors and value limits).
- ``casts``: casts and literals read as PostgreSQL reads them, ``pg_typeof``.
- ``parameters``: ``$n`` / ``%s`` numbering and the types inferred for parameters.
- ``output_names``: output columns named as PostgreSQL names them.

None of them imports ``rivulet.sql.binder``: the imports point from the binder down.
"""
