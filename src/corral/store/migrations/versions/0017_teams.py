"""teams: users with personal tokens and a role per project, owners of jobs, deployments and project tokens, and
the audit log of API calls

Existing jobs, deployments and project tokens were made with the admin token: their owner is "admin".

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'


def upgrade() -> None:
    for table in ('jobs', 'deployments', 'project_tokens'):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('owner', sa.String(64), nullable=False, server_default='admin'))
    with op.batch_alter_table('audit') as batch:
        batch.add_column(sa.Column('role', sa.String(20)))
        batch.add_column(sa.Column('object', sa.String(200)))
        batch.add_column(sa.Column('address', sa.String(100)))
        batch.add_column(sa.Column('outcome', sa.Integer()))
    op.create_index('ix_audit_at', 'audit', ['at'])
    op.create_index('ix_audit_actor', 'audit', ['actor', 'id'])
    op.create_table(
        'users',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('name', sa.String(64), nullable=False, unique=True),
        sa.Column('cluster_admin', sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column('unix_user', sa.String(32)),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('disabled_at', sa.Float()),
    )
    op.create_table(
        'memberships',
        sa.Column('user_id', sa.Integer(), primary_key=True),
        sa.Column('project', sa.String(100), primary_key=True),
        sa.Column('role', sa.String(20), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
    )
    op.create_index('ix_memberships_project', 'memberships', ['project'])
    op.create_table(
        'user_tokens',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(100), nullable=False),
        sa.Column('token_hash', sa.String(64), nullable=False, unique=True),
        sa.Column('prefix', sa.String(16), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('expires_at', sa.Float()),
        sa.Column('revoked_at', sa.Float()),
        sa.Column('last_used_at', sa.Float()),
    )
    op.create_index('ix_user_tokens_user', 'user_tokens', ['user_id'])


def downgrade() -> None:
    op.drop_index('ix_user_tokens_user', 'user_tokens')
    op.drop_table('user_tokens')
    op.drop_index('ix_memberships_project', 'memberships')
    op.drop_table('memberships')
    op.drop_table('users')
    op.drop_index('ix_audit_actor', 'audit')
    op.drop_index('ix_audit_at', 'audit')
    # DROP COLUMN in place (SQLite 3.35 and later too): a batch copy of jobs would break its tasks' foreign keys.
    for column in ('outcome', 'address', 'object', 'role'):
        op.execute(f'ALTER TABLE audit DROP COLUMN {column}')
    for table in ('project_tokens', 'deployments', 'jobs'):
        op.execute(f'ALTER TABLE {table} DROP COLUMN owner')
