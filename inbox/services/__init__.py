"""The inbox's services, one module per actor: worker, supervisor, dispatcher, clock,
intake, callback and admin.

Each public function checks who may act (inbox.selectors) and applies rows of the
transition table (inbox.lifecycle); views, the API, Celery tasks and commands call them.
"""
