"""history events: the event type a row was written with, and waits merged when they repeat

A row records the event type its table row or verdict declares, so a verdict and its event cannot
disagree; a wait (SKIPPED) that repeats with the same reason is counted on its row instead of
being dropped.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'


def upgrade() -> None:
    with op.batch_alter_table('history') as batch:
        batch.add_column(sa.Column('event', sa.String(64)))
        batch.add_column(sa.Column('repeats', sa.Integer(), nullable=False, server_default='1'))
        batch.add_column(sa.Column('last_at', sa.Float()))


def downgrade() -> None:
    with op.batch_alter_table('history') as batch:
        for column in ('last_at', 'repeats', 'event'):
            batch.drop_column(column)
