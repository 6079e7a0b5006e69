"""preemption: epochs, the drain trigger, grace periods, checkpoints and refunded attempts

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('preemption_epoch', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('drain_trigger', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('grace_period', sa.Float(), nullable=False, server_default='15'))
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('preempt_epoch', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('checkpoint_epoch', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('checkpoint_size', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('refunded', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_column('refunded')
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.drop_column('checkpoint_size')
        batch_op.drop_column('checkpoint_epoch')
        batch_op.drop_column('preempt_epoch')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('grace_period')
        batch_op.drop_column('drain_trigger')
        batch_op.drop_column('preemption_epoch')
