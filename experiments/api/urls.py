from django.urls import path

from . import views

urlpatterns = [
    path("exps", views.ExpListCreateView.as_view(), name="exp-list"),
    path("exps/<int:exp_id>", views.ExpDetailView.as_view(), name="exp-detail"),
    path("exps/<int:exp_id>/abort", views.ExpAbortView.as_view(), name="exp-abort"),
]
