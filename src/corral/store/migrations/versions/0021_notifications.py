"""notifications: the outbox of job webhooks, and each project's default notify URL

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0020'


def upgrade() -> None:
    op.create_table(
        'deliveries',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('url', sa.String(2048), nullable=False),
        sa.Column('event', sa.String(64), nullable=False),
        sa.Column('body', sa.JSON(), nullable=False),
        sa.Column('tries', sa.Integer(), nullable=False),
        sa.Column('next_try_at', sa.Float()),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('delivered_at', sa.Float()),
        sa.Column('gave_up_at', sa.Float()),
        sa.Column('last_error', sa.Text()),
    )
    op.create_index('ix_deliveries_next_try_at', 'deliveries', ['next_try_at'])
    op.create_index('ix_deliveries_job', 'deliveries', ['job_id', 'id'])
    op.create_table(
        'project_notify',
        sa.Column('project', sa.String(100), primary_key=True),
        sa.Column('url', sa.String(2048), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.Column('updated_by', sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('project_notify')
    op.drop_index('ix_deliveries_job', table_name='deliveries')
    op.drop_index('ix_deliveries_next_try_at', table_name='deliveries')
    op.drop_table('deliveries')
