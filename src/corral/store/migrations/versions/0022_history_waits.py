"""history_waits: the wait records of each job and handler in an index of their own, so that a wait seen again finds
the record it counts on without walking the job's history

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = '0022'
down_revision = '0021'

WAIT_RECORD = sa.text("result = 'SKIPPED' AND task_id IS NULL")


def upgrade() -> None:
    op.create_index('ix_history_waits', 'history', ['job_id', 'handler', 'id'],
                    sqlite_where=WAIT_RECORD, postgresql_where=WAIT_RECORD)


def downgrade() -> None:
    op.drop_index('ix_history_waits', table_name='history')
