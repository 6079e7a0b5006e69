"""event stream: worker events in history, an index for pruning it by age, jobs sortable by name

Revision ID: 0005
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0002'


def upgrade() -> None:
    with op.batch_alter_table('history', schema=None) as batch_op:
        batch_op.alter_column('job_id', existing_type=sa.Integer(), nullable=True)
        batch_op.add_column(sa.Column('worker_id', sa.String(length=64), nullable=True))
        batch_op.create_index('ix_history_at', ['at'], unique=False)
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_name', ['name'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_name')
    op.execute("DELETE FROM history WHERE job_id IS NULL")  # the workers' events: the older history cannot hold them
    with op.batch_alter_table('history', schema=None) as batch_op:
        batch_op.drop_index('ix_history_at')
        batch_op.drop_column('worker_id')
        batch_op.alter_column('job_id', existing_type=sa.Integer(), nullable=False)
