"""jobs.launched_by: the job whose task submitted a job

Revision ID: 0007
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0005'


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('launched_by', sa.Integer(), nullable=True))
        batch_op.create_index('ix_jobs_launched_by', ['launched_by'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_launched_by')
        batch_op.drop_column('launched_by')
