"""Users: one row per Cloudflare Access identity (seed 000, sections 3.4.4 and 3.5)."""
from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models


class UserManager(BaseUserManager):
    """Create users; `user_id` is the identity provider's `sub`."""

    use_in_migrations = True

    def create_user(self, email: str, user_id: str | None = None, password: str | None = None,
                    **extra):
        """Create a user; without `user_id` one is derived from the email (`local:<email>`)."""
        email = self.normalize_email(email)
        user = self.model(user_id=user_id or f"local:{email}", email=email, **extra)
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

    `user_id` is the Cloudflare Access `sub` claim (primary key, seed 3.5); `email` is unique.
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
