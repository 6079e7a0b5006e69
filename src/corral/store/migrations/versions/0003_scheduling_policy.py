"""scheduling policy: worker pools, custom resources and GPU devices; pool and quota tables

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0004'


def upgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pool', sa.String(length=100), nullable=False, server_default='default'))
        batch_op.add_column(sa.Column('custom', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('gpu_devices', sa.JSON(), nullable=True))
    op.create_table('pools',
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('policy', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('quotas',
    sa.Column('project', sa.String(length=100), nullable=False),
    sa.Column('limits', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('project')
    )


def downgrade() -> None:
    op.drop_table('quotas')
    op.drop_table('pools')
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_column('gpu_devices')
        batch_op.drop_column('custom')
        batch_op.drop_column('pool')
