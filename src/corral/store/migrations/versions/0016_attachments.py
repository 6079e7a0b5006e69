"""attachments: the channels clients open into running tasks through the controller's relay (corral.core.relay)

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'


def upgrade() -> None:
    op.create_table(
        'attachments',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('session', sa.String(64), nullable=False, unique=True),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('task_index', sa.Integer(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('worker_id', sa.String(64), nullable=False),
        sa.Column('kind', sa.String(16), nullable=False),
        sa.Column('detail', sa.JSON(), nullable=False),
        sa.Column('actor', sa.String(64), nullable=False),
        sa.Column('address', sa.String(100)),
        sa.Column('state', sa.String(16), nullable=False),
        sa.Column('opened_at', sa.Float(), nullable=False),
        sa.Column('connected_at', sa.Float()),
        sa.Column('closed_at', sa.Float()),
        sa.Column('close_code', sa.Integer()),
        sa.Column('close_reason', sa.Text()),
    )
    op.create_index('ix_attachments_worker', 'attachments', ['worker_id', 'state'])
    op.create_index('ix_attachments_job', 'attachments', ['job_id', 'id'])


def downgrade() -> None:
    op.drop_index('ix_attachments_job', 'attachments')
    op.drop_index('ix_attachments_worker', 'attachments')
    op.drop_table('attachments')
