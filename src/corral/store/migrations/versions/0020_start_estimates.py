"""start estimates: each pending job's latest, and a record of those made, held to account once the job starts;
attempts indexed by when they finished (the durations are learned from the latest)

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = '0020'
down_revision = '0019'


def upgrade() -> None:
    op.create_table(
        'start_estimates',
        sa.Column('job_id', sa.Integer(), primary_key=True),
        sa.Column('made_at', sa.Float(), nullable=False),
        sa.Column('start_at', sa.Float()),
        sa.Column('all_started_at', sa.Float()),
        sa.Column('after_job', sa.Integer()),
        sa.Column('basis', sa.Text(), nullable=False),
        sa.Column('unknown', sa.Text()),
        sa.Column('never', sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_table(
        'estimate_records',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('made_at', sa.Float(), nullable=False),
        sa.Column('start_at', sa.Float(), nullable=False),
        sa.Column('started_at', sa.Float()),
    )
    op.create_index('ix_estimate_records_job', 'estimate_records', ['job_id'])
    op.create_index('ix_estimate_records_started', 'estimate_records', ['started_at'])
    op.create_index('ix_attempts_finished', 'attempts', ['finished_at'])


def downgrade() -> None:
    op.drop_index('ix_attempts_finished', 'attempts')
    op.drop_index('ix_estimate_records_started', 'estimate_records')
    op.drop_index('ix_estimate_records_job', 'estimate_records')
    op.drop_table('estimate_records')
    op.drop_table('start_estimates')
