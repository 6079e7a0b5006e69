"""replica backoff: when a replica first served, and each deployment's failed starts in a row

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'


def upgrade() -> None:
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('failed_starts', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('failed_start_at', sa.Float(), nullable=True))
    with op.batch_alter_table('replicas', schema=None) as batch_op:
        batch_op.add_column(sa.Column('healthy_at', sa.Float(), nullable=True))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35+ can): rebuilding deployments would break the replicas' foreign key.
    with op.batch_alter_table('replicas', schema=None, recreate='never') as batch_op:
        batch_op.drop_column('healthy_at')
    with op.batch_alter_table('deployments', schema=None, recreate='never') as batch_op:
        batch_op.drop_column('failed_start_at')
        batch_op.drop_column('failed_starts')
