"""gpu shares: a task's GPU request may be a share of one device (0.25), so tasks.gpu holds a float

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'


def upgrade() -> None:
    with op.batch_alter_table('tasks') as batch:
        batch.alter_column('gpu', type_=sa.Float(), existing_type=sa.Integer(), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('tasks') as batch:
        batch.alter_column('gpu', type_=sa.Integer(), existing_type=sa.Float(), existing_nullable=False)
