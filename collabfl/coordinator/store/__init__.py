"""The coordinator's durable state: the SQLite file and its migrations, the record types and
their rules, the store, enrolment's tables, checkpoints, run folders, and the ration that
bounds how many events calls open to anyone may write.
"""
