"""gpu readings: what NVML last read of each device's use, kept apart from what registration said of it

A heartbeat that carries readings writes them with its last_heartbeat, in the one update it makes.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'


def upgrade() -> None:
    with op.batch_alter_table('workers') as batch:
        batch.add_column(sa.Column('gpu_readings', sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table('workers') as batch:
        batch.drop_column('gpu_readings')
