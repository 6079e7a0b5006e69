"""serving: deployments, replicas, their history, and the port a serving task was given

Revision ID: 0006
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0003'


def upgrade() -> None:
    op.create_table('deployments',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('state_since', sa.Float(), nullable=False),
    sa.Column('tries', sa.Integer(), nullable=False),
    sa.Column('replicas', sa.Integer(), nullable=False),
    sa.Column('key_hashes', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.create_index('ix_deployments_state', ['state'], unique=False)
        batch_op.create_index('ix_deployments_name', ['name'], unique=False)

    op.create_table('replicas',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('state_since', sa.Float(), nullable=False),
    sa.Column('address', sa.String(length=200), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], ),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('replicas', schema=None) as batch_op:
        batch_op.create_index('ix_replicas_deployment_state', ['deployment_id', 'state'], unique=False)

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

    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('port', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.drop_column('port')
    with op.batch_alter_table('serving_history', schema=None) as batch_op:
        batch_op.drop_index('ix_serving_history_deployment')
    op.drop_table('serving_history')
    with op.batch_alter_table('replicas', schema=None) as batch_op:
        batch_op.drop_index('ix_replicas_deployment_state')
    op.drop_table('replicas')
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.drop_index('ix_deployments_name')
        batch_op.drop_index('ix_deployments_state')
    op.drop_table('deployments')
