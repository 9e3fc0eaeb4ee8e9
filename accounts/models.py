"""Users: one row per Cloudflare Access identity, registered on first sight."""
from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models


class UserManager(BaseUserManager):
    """Create users; `user_id` is the identity provider's `sub`."""

    use_in_migrations = True

    @classmethod
    def normalize_email(cls, email: str | None) -> str:
        """Return the stored form of `email` (`accounts.emails.normalize_email`: validated,
        look-alikes refused, in the `email_key` normal form).

        Raises:
            django.core.exceptions.ValidationError: not a valid address (field `email`).
        """
        from django.core.exceptions import ValidationError

        from .emails import InvalidEmail, normalize_email

        try:
            return normalize_email(email or "")
        except InvalidEmail as exc:
            raise ValidationError({"email": [str(exc)]}) from None

    def get_by_natural_key(self, username: str):
        """Find a user by email in any case (the admin's and `createsuperuser`'s login), compared
        in `accounts.emails.email_key`'s normal form."""
        from .emails import email_key

        return self.get(email=email_key((username or "").strip()))

    def create_user(self, email: str, user_id: str | None = None, password: str | None = None,
                    **extra):
        """Create a user; without `user_id`, the `sub` the local issuer gives this email.

        So an operator made with `createsuperuser` is the same user as the one who later logs
        in with `falcon auth login --email` in the local mode.
        """
        from .issuer import local_subject

        email = self.normalize_email(email)
        user = self.model(user_id=user_id or local_subject(email), email=email, **extra)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, user_id: str | None = None,
                         password: str | None = None, **extra):
        """Create a staff superuser for the Django admin (local mode logs in with a password)."""
        extra.update(is_staff=True, is_superuser=True)
        return self.create_user(email, user_id=user_id, password=password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A person or service that uses Falcon.

    `user_id` is the Cloudflare Access `sub` claim (primary key); `email` is unique.
    Rows are auto-registered on the first authenticated request (`accounts.services.user_register`).
    """

    user_id = models.CharField(primary_key=True, max_length=255)
    email = models.EmailField(max_length=255, unique=True)
    is_staff = models.BooleanField(default=False, help_text="May use the admin and abort or "
                                   "delete any experiment.")
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    class Meta:
        db_table = "users"
        ordering = ["email"]

    def __str__(self) -> str:
        return self.email

    def clean(self) -> None:
        """Validate and normalise the email (forms: the admin, `createsuperuser`)."""
        super().clean()
        self.email = User.objects.normalize_email(self.email)

    def save(self, *args, **kwargs) -> None:
        """Store the email in its normal form (`accounts.emails.email_key`), whichever code path
        saves the row; the forms and services refuse look-alikes before (`normalize_email`)."""
        if self.email:
            from .emails import email_key

            self.email = email_key(self.email.strip())
        super().save(*args, **kwargs)


# The service roles (accounts.grpc_auth.ROLE_METHODS holds what each may call).
SERVICE_ROLES = ("exp-controller", "resource-manager", "analyzer", "maintenance", "read-only")


class ServicePrincipal(models.Model):
    """A Cloudflare Access service token an operator allows to call the API.

    Service tokens carry `common_name` (the token's client id), an empty `sub` and no `email`
    (Cloudflare "Validate JWTs"); they are never a `User` (decisions.md#auth-2). A token is allowed
    when its common name is in `settings.FALCON_CF_SERVICE_TOKENS` or has an active row here;
    a row with `is_active` off refuses it even when the setting lists it, so the admin is the
    quick way to cut one off. Its `role` (or FALCON_SERVICE_ROLES) says which gRPC methods it
    may call; without one it only reads.
    """

    common_name = models.CharField(
        max_length=255, unique=True,
        help_text="The service token's Client ID as Cloudflare puts it in `common_name`, "
                  "e.g. 0123abcd.access.")
    description = models.CharField(max_length=255, blank=True,
                                   help_text="Who uses this token and for what.")
    is_active = models.BooleanField(default=True, help_text="Off refuses the token (403).")
    role = models.CharField(
        max_length=32, blank=True, choices=[(r, r) for r in SERVICE_ROLES],
        help_text="The gRPC rights of this token (decisions.md#auth-8). Blank: the role "
                  "FALCON_SERVICE_ROLES gives it, else read-only.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "service_principals"
        ordering = ["common_name"]

    def __str__(self) -> str:
        return self.common_name


class CliLoginGrant(models.Model):
    """One confirmed `falcon auth login`, waiting for the CLI to redeem it (decisions.md#auth-12).

    Made when the user confirms the CLI login page (a CSRF-protected POST), deleted when the CLI
    redeems it, and once expired by the next grant made, confirmed or redeemed, or by
    `manage.py clear_cli_login_grants`. It binds the user's Access token to the CLI's `state`
    and PKCE `challenge` (RFC 7636, S256): only the holder of the `verifier` behind the
    challenge, who also learnt the one-time grant id from the loopback redirect, receives the
    token. Only the SHA-256 of the grant id is stored, and the token only sealed with a key
    derived from the grant id (`accounts.cli_login`): a row read from the database, a backup
    or a replica, expired or not, holds no usable token (decisions.md#dec-sec-auth).
    """

    grant_hash = models.CharField(primary_key=True, max_length=64,
                                  help_text="SHA-256 (hex) of the grant id sent to the loopback "
                                            "listener.")
    state = models.CharField(max_length=128)
    challenge = models.CharField(max_length=43, help_text="BASE64URL(SHA256(verifier)).")
    sealed_token = models.BinaryField(
        help_text="The user's Access token, AES-256-GCM with a key derived from the grant id "
                  "(never stored): nonce, then ciphertext and tag.")
    user_id = models.CharField(max_length=255)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "cli_login_grants"

    def __str__(self) -> str:
        return f"CLI login grant of {self.user_id}"
