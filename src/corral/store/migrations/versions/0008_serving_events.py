"""serving events: deployment and replica transitions join the history table, so the event stream carries them

Revision ID: 0008
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0006'

_MOVED = 'at, deployment_id, replica_id, handler, result, from_state, to_state, message'


def upgrade() -> None:
    with op.batch_alter_table('history', schema=None) as batch_op:
        batch_op.add_column(sa.Column('deployment_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('replica_id', sa.Integer(), nullable=True))
        batch_op.create_index('ix_history_deployment', ['deployment_id', 'id'], unique=False)
    op.execute(f'INSERT INTO history ({_MOVED}) SELECT {_MOVED} FROM serving_history ORDER BY id')
    with op.batch_alter_table('serving_history', schema=None) as batch_op:
        batch_op.drop_index('ix_serving_history_deployment')
    op.drop_table('serving_history')


def downgrade() -> None:
    op.create_table('serving_history',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('replica_id', sa.Integer(), nullable=True),
    sa.Column('handler', sa.String(length=64), nullable=False),
    sa.Column('result', sa.String(length=20), nullable=False),
    sa.Column('from_state', sa.String(length=20), nullable=True),
    sa.Column('to_state', sa.String(length=20), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('serving_history', schema=None) as batch_op:
        batch_op.create_index('ix_serving_history_deployment', ['deployment_id', 'id'], unique=False)
    op.execute(f'INSERT INTO serving_history ({_MOVED}) SELECT {_MOVED} FROM history '
               'WHERE deployment_id IS NOT NULL ORDER BY id')
    op.execute('DELETE FROM history WHERE deployment_id IS NOT NULL')
    with op.batch_alter_table('history', schema=None) as batch_op:
        batch_op.drop_index('ix_history_deployment')
        batch_op.drop_column('replica_id')
        batch_op.drop_column('deployment_id')
