import factory

from accounts.models import User


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("user_id",)

    user_id = factory.Sequence(lambda n: f"sub-{n}")
    email = factory.Sequence(lambda n: f"user{n}@example.com")
