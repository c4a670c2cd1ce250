"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22 03:44:43.887957
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('device_profiles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('profile_json', sa.Text(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name', name='uniq_device_profiles0name'),
    sa.UniqueConstraint('uuid', name='uniq_device_profiles0uuid')
    )
    op.create_table('devices',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('hostname', sa.String(length=255), nullable=True),
    sa.Column('driver_name', sa.String(length=64), nullable=True),
    sa.Column('identity', sa.String(length=255), nullable=True),
    sa.Column('type', sa.String(length=16), nullable=True),
    sa.Column('vendor', sa.String(length=255), nullable=True),
    sa.Column('model', sa.String(length=255), nullable=True),
    sa.Column('std_board_info', sa.Text(), nullable=True),
    sa.Column('vendor_board_info', sa.Text(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('health', sa.String(length=16), nullable=False),
    sa.Column('acc_specs', sa.Text(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('attach_type', sa.String(length=16), nullable=True),
    sa.Column('attached_to', sa.String(length=255), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('op_id', sa.String(length=36), nullable=True),
    sa.Column('op_started_at', sa.DateTime(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('hostname', 'driver_name', 'identity',
                        name='uniq_devices0hostname0driver0identity'),
    sa.UniqueConstraint('name', name='uniq_devices0name'),
    sa.UniqueConstraint('uuid', name='uniq_devices0uuid')
    )
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.create_index('devices_hostname_idx', ['hostname'], unique=False)

    op.create_table('driver_states',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('device_count', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('host', 'name', name='uniq_driver_states0host0name')
    )
    op.create_table('services',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('binary', sa.String(length=64), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(), nullable=False),
    sa.Column('report_epoch', sa.String(length=64), nullable=True),
    sa.Column('report_seq', sa.Integer(), nullable=True),
    sa.Column('report_digest', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('host', 'binary', name='uniq_services0host0binary')
    )
    op.create_table('controlpath_ids',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('cpid_type', sa.String(length=16), nullable=False),
    sa.Column('cpid_info', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_controlpath_ids0uuid')
    )
    op.create_table('deployables',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('root_id', sa.Integer(), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('num_accelerators', sa.Integer(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('driver_name', sa.String(length=100), nullable=True),
    sa.Column('bitstream_id', sa.String(length=36), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['parent_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['root_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('device_id', 'name', name='uniq_deployables0device0name'),
    sa.UniqueConstraint('uuid', name='uniq_deployables0uuid')
    )
    op.create_table('attach_handles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('deployable_id', sa.Integer(), nullable=False),
    sa.Column('cpid_id', sa.Integer(), nullable=False),
    sa.Column('in_use', sa.Boolean(), nullable=False),
    sa.Column('attach_type', sa.String(length=16), nullable=False),
    sa.Column('attach_info', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['cpid_id'], ['controlpath_ids.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_attach_handles0uuid')
    )
    op.create_table('attributes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('deployable_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.Text(), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_attributes0uuid')
    )
    op.create_table('extended_accelerator_requests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('device_profile_id', sa.Integer(), nullable=False),
    sa.Column('device_profile_group_id', sa.Integer(), nullable=False),
    sa.Column('hostname', sa.String(length=255), nullable=True),
    sa.Column('device_rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('instance_uuid', sa.String(length=36), nullable=True),
    sa.Column('attach_handle_id', sa.Integer(), nullable=True),
    sa.Column('deployable_id', sa.Integer(), nullable=True),
    sa.Column('substate', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['attach_handle_id'], ['attach_handles.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['device_profile_id'], ['device_profiles.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_extended_accelerator_requests0uuid')
    )
    with op.batch_alter_table('extended_accelerator_requests', schema=None) as batch_op:
        batch_op.create_index('extended_accelerator_requests_instance_uuid_idx',
                              ['instance_uuid'], unique=False)
        batch_op.create_index('extended_accelerator_requests_project_id_idx',
                              ['project_id'], unique=False)

