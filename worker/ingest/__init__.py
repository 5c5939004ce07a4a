"""JSONL import of notes, sessions, entities and examples: validate every line first, then write all
at once. A bad line anywhere means nothing is written (R22); the error names the line number."""

from worker.ingest.entities import import_entities as import_entities
from worker.ingest.examples import EXAMPLE_FIELDS as EXAMPLE_FIELDS
from worker.ingest.examples import import_examples as import_examples
from worker.ingest.jsonl import InputError as InputError
from worker.ingest.notes import NOTE_FIELDS as NOTE_FIELDS
from worker.ingest.notes import import_notes as import_notes
from worker.ingest.sessions import SESSION_FIELDS as SESSION_FIELDS
from worker.ingest.sessions import import_sessions as import_sessions
