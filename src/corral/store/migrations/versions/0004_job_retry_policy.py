"""job retry policy: the retry chain columns, OOM kills of attempts, retry defaults, audit

Revision ID: 0004
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0007'


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('parent_job_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('retry_root_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('retry_count', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('max_retries', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('retry_policy', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('retry_cause', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('retry_state', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('retry_due_at', sa.Float(), nullable=True))
        batch_op.create_index('ix_jobs_retry', ['retry_state', 'retry_due_at'], unique=False)
        batch_op.create_index('ix_jobs_retry_root', ['retry_root_id'], unique=False)
        batch_op.create_index('ix_jobs_parent', ['parent_job_id'], unique=False)
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('oom_killed', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table('retry_defaults',
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('policy', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('kind', 'name')
    )
    op.create_table('audit',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('actor', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('audit', schema=None) as batch_op:
        batch_op.create_index('ix_audit_job', ['job_id', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('audit', schema=None) as batch_op:
        batch_op.drop_index('ix_audit_job')
    op.drop_table('audit')
    op.drop_table('retry_defaults')
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_column('oom_killed')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_parent')
        batch_op.drop_index('ix_jobs_retry_root')
        batch_op.drop_index('ix_jobs_retry')
        for column in ('retry_due_at', 'retry_state', 'retry_cause', 'retry_policy', 'max_retries', 'retry_count',
                       'retry_root_id', 'parent_job_id'):
            batch_op.drop_column(column)
