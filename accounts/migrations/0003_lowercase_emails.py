"""Store every user's email lower-cased (accounts.emails), refusing to merge duplicates.

Rows whose emails differ only in case (possible on SQLite before this rule) are two identities
with two `sub`s; merging them silently would hand one person's experiments to the other. The
migration stops instead and names them, so an operator decides which row stays (delete or
rename the other in the admin or a shell, then migrate again).
"""
from django.db import migrations


def lowercase_emails(apps, schema_editor):
    User = apps.get_model("accounts", "User")
    groups: dict[str, list[tuple[str, str]]] = {}
    for user_id, email in User.objects.values_list("user_id", "email"):
        groups.setdefault(email.strip().lower(), []).append((user_id, email))
    clashes = {key: rows for key, rows in groups.items() if len(rows) > 1}
    if clashes:
        lines = "; ".join(
            f"{key!r}: " + ", ".join(f"user_id={uid!r} email={email!r}" for uid, email in rows)
            for key, rows in sorted(clashes.items()))
        raise RuntimeError(
            "accounts.0003: these users' emails differ only in case and would become one "
            f"address: {lines}. Keep one user per address (delete or change the email of the "
            "others in the admin), then run migrate again. Nothing was changed.")
    # Compared here, not in SQL: MariaDB's case-insensitive collation finds `email = LOWER(email)`
    # true for every row.
    for key, rows in groups.items():
        user_id, email = rows[0]
        if email != key:
            User.objects.filter(pk=user_id).update(email=key)


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_service_principal")]
    operations = [migrations.RunPython(lowercase_emails, migrations.RunPython.noop)]
