"""CLI login grants keep their token sealed with a key only the grant id gives
(decisions.md#dec-sec-auth).

Grants live at most 120 s, so the rows of a running login are dropped rather than converted: such a
login is run again.
"""
from django.db import migrations, models


def drop_grants(apps, schema_editor):
    apps.get_model("accounts", "CliLoginGrant").objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0005_cli_login_grant"),
    ]

    operations = [
        migrations.RunPython(drop_grants, migrations.RunPython.noop),
        migrations.RemoveField(model_name="clilogingrant", name="token"),
        migrations.AddField(
            model_name="clilogingrant",
            name="sealed_token",
            field=models.BinaryField(
                default=b"",
                help_text="The user's Access token, AES-256-GCM with a key derived from the grant "
                          "id (never stored): nonce, then ciphertext and tag."),
            preserve_default=False,
        ),
    ]
